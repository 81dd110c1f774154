"""nova-imgtype benchmarks: every plugin figure next to stock Nova's,
measured in the same run on the same machine (``make bench``)."""
