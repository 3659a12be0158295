"""The demo `make run` sets up: a login, projects with synthetic and real data, and the
demo's background work (the demo policy's training, then rollouts)."""
