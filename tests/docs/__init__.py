"""The documentation site builds, its snippets run and say what they do; the examples run."""
