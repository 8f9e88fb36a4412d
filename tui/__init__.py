"""warpsmith's Textual app (arrives with the terminal-app issue)."""
