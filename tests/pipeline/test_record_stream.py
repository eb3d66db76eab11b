"""Record files as streams: the streamed writer gives jsonio's bytes, the scanner orjson's values.

Checked over tiny read chunks too, so every record, string and escape is cut by a chunk's end
somewhere, and over the layouts a user's file may have (compact, indented, hand-spaced)."""

import io
import json
from pathlib import Path

import orjson
import pytest

from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.formats.record_stream import (
    NotAnArray,
    array_chunks,
    iter_array,
    lines_chunks,
    read_span,
    scan_array,
)

RECORDS = [
    {"env_id": "env000", "task": "put a \"clean\" mug [in] {shelf}, now",
     "trajectories": [{"steps": [], "meta": {}, "notes": ["a\nb", "tab\there", "é ✓ \\"]}]},
    {},
    [],
    [1, 2.5, None, True, False, "x,]}"],
    "a string record",
    -3,
    {"nested": {"deeper": {"deepest": [[], [{}], {"k": [1, [2, [3]]]}]}}},
]


@pytest.mark.parametrize("records", [RECORDS, [], [{}], [RECORDS[0]]],
                         ids=["mixed", "empty", "one-empty", "one"])
def test_streamed_writer_matches_jsonio(records: list) -> None:
    assert b"".join(array_chunks(iter(records))) == jsonio.dumps(records)
    assert b"".join(lines_chunks(iter(records))) == jsonio.dumps_lines(records)


@pytest.mark.parametrize("layout", [
    lambda r: jsonio.dumps(r),
    lambda r: orjson.dumps(r),
    lambda r: json.dumps(r, indent=4, ensure_ascii=True).encode(),
    lambda r: b"\n\t " + json.dumps(r, separators=(" , ", " : ")).encode() + b"  \n",
], ids=["ours", "compact", "json-indent4", "spaced"])
@pytest.mark.parametrize("chunk", [1, 3, 7, 1 << 20])
def test_scanner_finds_every_element(layout, chunk: int) -> None:
    data = layout(RECORDS)
    elements = list(scan_array(io.BytesIO(data), chunk_bytes=chunk))
    assert [v for _, _, v in elements] == RECORDS
    handle = io.BytesIO(data)
    assert [read_span(handle, offset, len(e)) for offset, e, _ in elements] == RECORDS


def test_a_two_space_closer_that_is_not_the_element_end() -> None:
    data = b'[{\n  "a": {"b": 1\n  }, "c": [2\n  ]\n  },\n  [\n  1\n  ]]'
    values = [v for _, _, v in scan_array(io.BytesIO(data), chunk_bytes=4)]
    assert values == orjson.loads(data)


def test_empty_list_and_file_reader(tmp_path: Path) -> None:
    assert list(scan_array(io.BytesIO(b" [ ] \n"))) == []
    path = tmp_path / "records.json"
    path.write_bytes(jsonio.dumps(RECORDS))
    assert list(iter_array(path)) == RECORDS


@pytest.mark.parametrize("data", [b"", b"[1, 2", b"[1,]", b"[1,,2]", b'["open', b"[1] 2",
                                  b"[{]"], ids=repr)
def test_broken_json_is_a_decode_error(data: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError):
        list(scan_array(io.BytesIO(data), chunk_bytes=2))


@pytest.mark.parametrize(("data", "kind"), [(b'{"general_skills": []}', "dict"),
                                             (b'"text"', "str"), (b"42", "int")])
def test_other_documents_say_what_they_are(data: bytes, kind: str) -> None:
    with pytest.raises(NotAnArray) as raised:
        list(scan_array(io.BytesIO(data)))
    assert raised.value.kind == kind


def test_streamed_loader_equals_the_list_loader(tmp_path: Path) -> None:
    """`iter_records` yields what `load_records` lists, and leaves the same rejects, positions
    and counters (duplicates counted once, by identity)."""
    from skillsft.cli import main
    from skillsft.pipeline.formats.record_files import (
        MEMORIES,
        LoadedRecords,
        iter_records,
        load_records,
    )

    work = tmp_path / "work"
    assert main(["run", "alfworld", "--teacher", "offline", "--work-dir", str(work)]) == 0
    memories = json.loads((work / "generated_memories.json").read_text())
    memories[1:1] = [{"memory_id": "broken"}, dict(memories[0])]
    path = tmp_path / "memories.json"
    path.write_text(json.dumps(memories))

    listed = load_records(path, MEMORIES, "aggregate")
    streamed: LoadedRecords = LoadedRecords([])
    records = list(iter_records(path, MEMORIES, "aggregate", streamed))
    assert records == listed.records
    assert streamed.rejects == listed.rejects and streamed.rejects
    assert streamed.reject_positions == listed.reject_positions == [1]
    assert streamed.counts == listed.counts
    assert listed.counts["duplicate_memory_id"] == 1


def test_models_inside_plain_data_serialise_like_to_jsonable() -> None:
    """jsonio lets orjson walk lists, tuples and dicts itself and converts only models: the
    bytes are those of converting everything first, aliases included."""
    from skillsft.schemas.conversation import AlpacaRecord, Conversation, ExtraInfo, Turn

    conversation = Conversation(
        system="s {x}", conversations=[Turn(from_="human", value="é")],
        extra_info=ExtraInfo(task="t", task_type="pick", num_steps=1, source="offline"))
    data = {"records": [AlpacaRecord(instruction="a\nb", output="c")],
            "pair": (conversation, {"deep": [conversation, 1, None]}), 3: "non-str key"}
    assert jsonio.dumps(data) == orjson.dumps(
        jsonio.to_jsonable(data), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n"
    assert b'"from":"human"' in jsonio.dumps_line(conversation)
    expected = orjson.dumps(jsonio.to_jsonable([conversation])) + b"\n"
    assert jsonio.dumps_line([conversation]) == expected
    assert b"".join(array_chunks([data])) == jsonio.dumps([data])
    with pytest.raises(TypeError):
        jsonio.dumps_line({"x": object()})
