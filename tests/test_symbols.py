"""A part's definitions by name (query/symbols.py): hashed names, each match checked against the name itself."""

import random
import string

import numpy as np
import pyarrow as pa

from query.symbols import SymbolIndex, name_hashes


def colliding_names() -> tuple[str, str]:
    """Two distinct names with one 32-bit hash, found among random ones (about 77k draws expect one pair)."""
    rng = random.Random(36)
    names = list({"".join(rng.choices(string.ascii_lowercase + "_", k=12)) for _ in range(300_000)})
    hashes = name_hashes(pa.array(names))
    order = np.argsort(hashes, kind="stable")
    same = np.flatnonzero(hashes[order][1:] == hashes[order][:-1])
    assert len(same), "no two of 300,000 random names share a 32-bit hash"
    return names[order[same[0]]], names[order[same[0] + 1]]


def test_a_name_hashes_alike_wherever_it_lies_in_the_array():
    names = pa.array(["", "make_context", "x" * 5000, "Make_Context", "make_context", "é::ü"])
    hashes = name_hashes(names)
    assert hashes[1] == hashes[4] != hashes[3]
    assert name_hashes(names.slice(4, 2)).tolist() == hashes[4:].tolist()
    assert name_hashes(pa.array(["é::ü"]))[0] == hashes[5]
    assert len(set(name_hashes(pa.array([f"name{i}" for i in range(1000)])).tolist())) == 1000


def test_names_hashed_in_blocks_hash_as_they_do_alone(monkeypatch):
    from query import symbols

    names = pa.array([f"defined_{i}" * (1 + i % 5) for i in range(500)] + ["y" * 300, "", "last"])
    whole = name_hashes(names)
    monkeypatch.setattr(symbols, "_BLOCK_BYTES", 64)  # many blocks, one longer than a block alone
    assert name_hashes(names).tolist() == whole.tolist()
    assert name_hashes(names.slice(7, 300)).tolist() == whole[7:307].tolist()


def test_definitions_are_found_under_their_whole_and_last_names():
    symbols = pa.chunked_array([["Command.make_context", None, "make_context", "Mod", "ns::Widget", "", "other"]])
    defines = np.array([True, True, True, False, True, True, True])
    index = SymbolIndex(symbols, defines)
    assert index.get("make_context").tolist() == [0, 2]
    assert index.get("command.make_context").tolist() == [0]
    assert index.get("widget").tolist() == [4] and index.get("ns::widget").tolist() == [4]
    assert index.get("mod").tolist() == []  # not a definition by its kind
    assert index.get("").tolist() == [] and index.get("missing").tolist() == []


def test_names_whose_hashes_collide_find_only_their_own_rows():
    first, second = colliding_names()
    index = SymbolIndex(pa.chunked_array([[first, second, f"Holder.{second}"]]), np.ones(3, dtype=bool))
    assert index.get(first).tolist() == [0]
    assert index.get(second).tolist() == [1, 2]


def test_a_part_that_lacks_a_name_is_passed_over_by_its_filter_mostly():
    names = [f"defined_{i}" for i in range(5000)]
    index = SymbolIndex(pa.chunked_array([names]), np.ones(len(names), dtype=bool))
    assert all(index.may_hold(int(key)) for key in name_hashes(pa.array(names)))
    absent = name_hashes(pa.array([f"absent_{i}" for i in range(5000)]))
    passed = sum(index.may_hold(int(key)) for key in absent)
    assert passed < 0.25 * len(absent)  # about 8 bits a name: an eighth or so pass
    assert index.get("defined_42").tolist() == [42] and index.get("absent_42").tolist() == []
