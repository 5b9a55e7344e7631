"""All I/O of a turn: model streaming, tools, persistence and publishing."""
