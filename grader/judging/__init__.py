"""From observations to verdicts, pure: evidence in (grader.evidence), scored and diagnosed results out
(grader.results). Never a process, a socket or a file. May import the model below it (evidence, results,
authoring's specs, trap ids); nothing of running/, publishing/, operations/ or cli/."""
