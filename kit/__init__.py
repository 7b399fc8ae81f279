"""The kit every process is built on: settings, logging, TLS, HTTP errors and middleware, the
base aiohttp app and the process `main`.  Imports only the contracts layer."""
