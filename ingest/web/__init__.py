"""The web view: the live page, its fragments and stills, and the zone editor, behind a token.
The highest room: it may import every other room, and none imports it but the CLI."""
