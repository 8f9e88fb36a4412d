"""The app's widgets, one area each."""
