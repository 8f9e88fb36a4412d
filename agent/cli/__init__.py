"""The warpsmith command: argument parsing and one function per subcommand (commands: doctor, compile, eval; loop_commands: run, resume, runs, export, ui; new/review, check, bench, diff)."""
