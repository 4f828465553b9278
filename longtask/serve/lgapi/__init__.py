"""The LangGraph Server API, served by ``longtask serve``: assistants, threads, runs, state,
history and streams in the shapes LangGraph's own server answers with, over longtask's
threads (``docs/reference/server-api.md``). A room inside ``serve``: it imports serve's
shared parts (``serve._http``, ``serve._registry``...) and the floors below serve, never the
CLI. Nothing is re-exported: ``serve._app`` mounts the routes."""
