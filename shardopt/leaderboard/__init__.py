"""Solver leaderboards: `store` (the resumable SQLite store), `run` (solving and judging a suite into it), `report`
(statistics, Markdown, HTML with plots)."""
