"""Paimon's field aggregate functions, vectorised over many primary keys at once.

The `aggregation` merge engine (and per-field aggregation inside `partial-update`) folds all rows of
one key, in sequence order, field by field. `aggregate` does that fold for one column and many keys:
rows sorted by (key, sequence), `starts` marking the first row of each key, one result per key.

Semantics follow Paimon's Java `FieldAggregator` classes (paimon-core `mergetree/compact/aggregate`)
and the aggregation docs; pypaimon 2.1 was read for the defaults it shares. The accumulator starts
as null, +I/+U rows go through `agg`, -U/-D rows through `retract`:

- sum / product: nulls are skipped; integer overflow is an error (Java's `addExact`/`multiplyExact`);
  retraction subtracts (from a null accumulator: the negated value) / divides (Java integer division,
  truncating; a null accumulator stays null). DECIMAL keeps its exact value (products and quotients
  are rounded HALF_UP to the column scale after every step, as `Decimal.fromBigDecimal` does). A
  DECIMAL that outgrows its precision is an error here (Java's `DecimalUtils.add` keeps an
  out-of-precision value up to precision 18 and turns it into null above); so are an integer
  division by zero and a non-terminating DECIMAL quotient (Java throws ArithmeticException).
- count (Paimon's old `FieldCountAgg`; the current docs replace it with sum): counts non-null values,
  retraction counts down. Its first row sets 0 or 1, so a key whose values are all null gets 0.
- min / max: nulls skipped; FLOAT/DOUBLE ordered like Java's `Double.compare` (-0.0 < 0.0, NaN last).
- last_value: the last row's value, null included; a retraction sets null.
- last_non_null_value: the last non-null value; a retraction carrying a non-null value sets null.
- first_value (first row, null included), first_non_null_value, bool_and, bool_or, rbm32, rbm64: no
  retraction.
- listagg: non-null values joined by `fields.<f>.list-agg-delimiter` (Paimon's default ","); empty
  strings are skipped unless nothing else is there. With `fields.<f>.distinct` each later value is
  split on the whole delimiter and only tokens not seen yet (and not empty) are appended; the first
  value is kept whole. No retraction.
- collect: concatenation of the arrays (null elements kept); `distinct` keeps each element once.
  Retraction removes, for every retracted element, one equal element (the first) from the
  accumulator; a null accumulator stays null.
- merge_map: union of the maps, later values win; retraction removes the retracted map's keys.
- nested_update (ARRAY<ROW>): with `nested-key` rows with the same key are replaced by the newer row,
  without it rows are appended; null rows are dropped once two arrays meet. Retraction removes the
  rows with a retracted key (without keys: every row equal to a retracted row).
- rbm32 / rbm64 (serialized roaring bitmaps): union. A key with one bitmap keeps its bytes as they
  are (Java returns the input object); a union is written after run-optimisation, as Paimon does.
- Retraction of a null value changes nothing, except for `count`/`last_value` as above. Java throws
  a NullPointerException for a null array/map retracted by collect/merge_map; pypaimon (and this
  package) ignore it.
- A function that cannot retract raises `InvalidInputError` on -U/-D rows unless
  `fields.<f>.ignore-retract` is set, which skips them (Java's `FieldIgnoreRetractAgg`).

Order of unordered results: Java builds merge_map and keyed nested_update results in a `HashMap`
and distinct collect of atomic elements in a `HashSet`, whose iteration order is unspecified; here
the order is that of first appearance (the latest value for a repeated key).

Vectorisation: every function works on whole columns with numpy/Arrow kernels (segmented reductions,
prefix sums, group-bys), with these exceptions, all loops being over *groups or positions*, never
over all rows:
- rbm32/rbm64 loop over the keys that have two or more bitmaps (each union is a pyroaring call).
- collect/merge_map/nested_update fold in Python, key by key, only the keys that carry retraction
  rows (the multiset/keyed removals are sequential), and all keys when distinct elements, map keys
  or nested-key fields are nested types that Arrow cannot group by.
- product keys that carry retraction rows, and every DECIMAL product, are folded position by
  position: one vectorised step per position within a key across all such keys (Java's truncating
  division and per-step rounding make the fold non-associative). The loop runs as many times as the
  longest such key has rows.
- FLOAT/DOUBLE sums use a pairwise segmented sum, so they may differ from Java's left fold in the
  last bits.

The package: `functions` (names, type rules, options), `registry` (the `aggregate` entry point), `groups`
(the grouped column all implementations share), one module per family of functions (`values`, `numeric`,
`extremes`, `collections`, `bitmaps`).
"""

from lsmlake.mergetree.merge.aggregators.bitmaps import (
    rbm32_deserialize,
    rbm32_serialize,
    rbm64_deserialize,
    rbm64_serialize,
)
from lsmlake.mergetree.merge.aggregators.functions import FUNCTIONS, FieldAggOptions, supports_retract, validate
from lsmlake.mergetree.merge.aggregators.registry import aggregate

__all__ = ["FUNCTIONS", "FieldAggOptions", "aggregate", "rbm32_deserialize", "rbm32_serialize",
           "rbm64_deserialize", "rbm64_serialize", "supports_retract", "validate"]
