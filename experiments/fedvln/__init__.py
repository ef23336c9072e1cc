"""FedVLN's tables and studies (one script per table or study)."""
