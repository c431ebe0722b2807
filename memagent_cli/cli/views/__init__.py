"""What a terminal shows while and after a run: the live view, the multi-question table, reports."""
