"""The Server API's resources besides threads and runs: assistants (versioned
configurations of a task), crons (on longtask's schedules) and the store (LangGraph's own
``BaseStore`` on the thread database). A room inside ``lgapi``: it uses the Server API's
shared parts; ``serve._app`` mounts its routes. Nothing is re-exported."""
