"""The teleop-intervention GUI: a page served by the run (``gui.enabled``) where a person watches the robots,
takes over, labels episodes and presses the e-stop (``server.py``; the page is ``static/``)."""
