"""``make demo``: the whole product on this machine, driven by a scripted set of customer messages.

processes.py starts the services (and the local channel server) as separate processes,
bootstrap.py makes the demo org through the CLI and the API, scenario.py plays the
customer messages through the signed webhook and checks what follows, report.py prints
it. The end-to-end tests (tests/e2e) run the same scenario code. See docs/demo.md.
"""
