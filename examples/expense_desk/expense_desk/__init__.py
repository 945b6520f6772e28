"""An expense desk built on ackloop: the tutorial's app (docs/tutorial/)."""
