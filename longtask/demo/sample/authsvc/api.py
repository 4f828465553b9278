"""The HTTP layer, without the HTTP: a path and headers in, a status and a body out."""

from authsvc import auth


def handle(path: str, headers: dict[str, str]) -> tuple[int, str]:
    user = auth.current_user(headers)
    if user is None:
        return 401, "unauthorized"
    if path == "/me":
        return 200, user
    return 404, "not found"
