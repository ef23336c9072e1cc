"""What each method's two sides agree on: what may be sent, who acts, model sizing and id
sampling. `server/` and `clients/` both import these and never each other."""
