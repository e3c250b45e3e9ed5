"""Tools around the samplers: the command line, the end-to-end demo, and plots."""
