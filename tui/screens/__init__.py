"""The app's screens: budget dialog, quit confirmation, past runs."""
