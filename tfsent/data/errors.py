"""The one error type of the data layer: bad input files, bad prepared datasets, mismatched manifests."""

from tfsent.errors import UserError


class DataError(UserError):
    """Input or prepared data that cannot be used; the message names the file and the line, shard or key."""
