"""The benchmarks of toolsearch, run from a clone: `python benchmarks/<name>.py --help` (shared code in lib/)."""
