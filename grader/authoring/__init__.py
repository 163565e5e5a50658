"""Tools for the people who write assignments (not run while grading students)."""
