"""mpilab.validate: what callers pass in is checked in one place, with one wording."""

import numpy as np
import pytest

from mpilab import validate

MODES = ("blocking", "sendrecv", "nonblocking")


def test_count_takes_integers_at_or_above_the_lowest():
    assert validate.count(3, "ranks") == 3 and type(validate.count(np.int64(3), "n")) is int
    assert validate.count(0, "steps", 0) == 0
    with pytest.raises(ValueError, match="ranks must be >= 1, got 0"):
        validate.count(0, "ranks")
    for bad in (2.0, True, "3", None):
        with pytest.raises(TypeError, match="nx must be an integer"):
            validate.count(bad, "nx")


def test_names_from_a_string_a_list_or_a_group():
    assert validate.names("blocking", MODES, "mode") == ["blocking"]
    assert validate.names(" sendrecv, blocking,sendrecv ", MODES, "mode") == [
        "sendrecv", "blocking"]  # order kept, duplicates dropped
    assert validate.names(("nonblocking",), MODES, "mode") == ["nonblocking"]
    assert validate.names("all", MODES, "mode") == list(MODES)
    groups = {"two": MODES[:2], "all": MODES}
    assert validate.names(["two", "nonblocking"], MODES, "mode", groups) == list(MODES)


def test_names_say_what_is_wrong():
    with pytest.raises(ValueError, match=r"mode must be one of \('blocking', 'sendrecv', "
                                         r"'nonblocking'\) \(or 'all'\), got 'warp'"):
        validate.names("blocking,warp", MODES, "mode")
    with pytest.raises(ValueError, match="no mode given"):
        validate.names(" , ", MODES, "mode")
    with pytest.raises(ValueError, match="no mode given"):
        validate.names([], MODES, "mode")
    with pytest.raises(TypeError, match="mode must be a name or a list of names, not int"):
        validate.names(3, MODES, "mode")
    with pytest.raises(ValueError, match="got 3"):
        validate.names([3], MODES, "mode")
    with pytest.raises(ValueError, match=r"one of \('blocking', 'sendrecv', 'nonblocking'\), "
                                         "got 'all'"):
        validate.names("all", MODES, "mode", {})  # no groups: "all" is not a name


def test_sizes_with_suffixes():
    assert validate.sizes("8, 1K,4M,1g,2KB") == [8, 1024, 4 << 20, 1 << 30, 2048]
    with pytest.raises(ValueError, match="no sizes given"):
        validate.sizes("")
    with pytest.raises(ValueError, match="not a size: 'LOTS'"):
        validate.sizes("8,lots")
    with pytest.raises(ValueError, match="sizes must be >= 0"):
        validate.sizes("-8")
