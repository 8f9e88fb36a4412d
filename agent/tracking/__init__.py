"""What a session leaves behind: MLflow runs (and the UI on them), traces, reports and the exported best kernel."""
