"""The leaf of the project: the IR and its JSON I/O, the memory model, the plan checker, feasibility, table
statistics and index traces, hardware profiles. It imports nothing else of the project and never torch, so every
other layer (data, cost models, solvers, measurement, CLI) can build on it."""
