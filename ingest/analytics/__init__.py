"""Analytics: a camera's answers, in capture order, through its tracker, zones and lines (the
scene), into events and counts. Imports `cameras` (units) and `sinks` (metrics), never `web`."""
