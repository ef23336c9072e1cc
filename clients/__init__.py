"""The ClientApp and one handler module per method family."""
