"""Results out: a grade's reports (Markdown, HTML, terminal) and files, LMS formats (Gradescope, PrairieLearn,
GitHub Classroom, Canvas), a class's gradebook and similarity reports. May import judging/ and the model;
never running/, operations/ or cli/."""
