"""`streamshop up`: the whole local stack as supervised child processes.

`plan` says what runs (children, commands, environments, start order, restart backoff, the
shared secrets, the URL table), `state` reads and writes ``DATA_DIR/stack.json``, `console`
prefixes and colours the children's output, and `supervisor` runs it all on one asyncio loop.
"""
