"""The version of longtask, on the lowest floor: every room may name it (an export's
manifest, the Server API's ``/info``) without importing the package's public names."""

__version__ = "0.1.0"
