"""From a plan to a running server: launchers, download, log followers, the watch, the store."""
