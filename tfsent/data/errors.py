"""The one error type of the data layer: bad input files, bad prepared datasets, mismatched manifests."""


class DataError(ValueError):
    """Input or prepared data that cannot be used; the message names the file and the line, shard or key."""
