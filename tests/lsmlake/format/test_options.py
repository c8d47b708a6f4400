"""The option registry: typed accessors, validation, and the generated docs being current."""

from __future__ import annotations

import pytest

from lsmlake.errors import InvalidInputError, UnknownOptionError
from lsmlake.format import options as opts
from tests.support.paths import ROOT


def test_docs_are_generated_from_the_registry() -> None:
    text = (ROOT / "docs" / "options.md").read_text()
    assert opts.docs_table() in text, "docs/options.md is stale: regenerate it (see its header)"


def test_every_option_is_documented() -> None:
    for key, o in opts.REGISTRY.items():
        assert o.description.strip(), key


def test_typed_values_and_derived_defaults() -> None:
    o = opts.TableOptions({"bucket": "4", "target-file-size": "64 mb", "snapshot.time-retained": "30 min",
                           "num-sorted-run.compaction-trigger": "7"})
    assert o.bucket() == 4
    assert o.target_file_size(True) == 64 << 20
    assert o.require(opts.SNAPSHOT_TIME_RETAINED) == 30 * 60_000
    assert o.num_levels() == 8
    assert opts.TableOptions({}).target_file_size(False) == 256 << 20
    assert opts.TableOptions({}).num_levels() == 6


@pytest.mark.parametrize("options,err", [
    ({"no-such-option": "1"}, UnknownOptionError),
    ({"bucket": "four"}, InvalidInputError),
    ({"target-file-size": "12 parsecs"}, InvalidInputError),
    ({"snapshot.time-retained": "soon"}, InvalidInputError),
])
def test_bad_options_are_rejected_with_the_key_named(options, err) -> None:
    with pytest.raises(err) as e:
        opts.validate(options)
    assert list(options)[0] in str(e.value)
