from authsvc import api, auth


def test_login_then_me() -> None:
    headers = auth.login("alice", "wonderland")
    assert headers is not None
    assert api.handle("/me", headers) == (200, "alice")


def test_wrong_password() -> None:
    assert auth.login("alice", "nope") is None


def test_no_credentials() -> None:
    assert api.handle("/me", {})[0] == 401


def test_tampered_credentials() -> None:
    headers = auth.login("bob", "builder")
    assert headers is not None
    forged = {
        k: v[:-4] + ("AAAA" if not v.endswith("AAAA") else "BBBB") for k, v in headers.items()
    }
    assert api.handle("/me", forged)[0] == 401
