"""CDL's and the driving silos' tables (one script per table or study)."""
