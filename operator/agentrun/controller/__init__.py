"""The operator process: Kopf handlers, the reconcilers they trigger, and the timer loop."""
