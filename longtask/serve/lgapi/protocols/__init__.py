"""The assistants over other protocols than the Server API's own: MCP (each assistant a
tool, with tools to read and answer a thread's pauses) and A2A (agent cards and JSON-RPC
methods). A room inside ``lgapi``: it uses the Server API's shared parts (``lgapi._common``,
``lgapi._json``...) and passes the same gate; ``serve._app`` mounts its endpoints. Nothing is
re-exported."""
