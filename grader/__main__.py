from grader.cli import entry_point

entry_point()
