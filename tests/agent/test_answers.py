"""The answer parsers (nodes/shared/answers.py) on answers shaped like real models' ones: quoted
old kernels, think blocks with decoys, odd fence labels, CRLF, cut-off answers, plans in prose."""

from __future__ import annotations

from typing import Literal, get_args

import pytest
from pydantic import BaseModel, field_validator

from astra_kernels.nodes.shared.answers import (
    Block, extract_code, extract_json, fenced_blocks, normalise_choice, same_code, strip_thinking,
)

OLD = """#include "common.cuh"

//@ kernel: act_and_mul
//@ grid: T
//@ block: min(D // VEC, 256)

extern "C" __global__ void act_and_mul(const scalar_t* __restrict__ x, scalar_t* out, int tokens, int d) {
    // a long loop over the row, one vector of each half per thread
#pragma unroll 1
    for (int i = threadIdx.x; i < d / VEC; i += blockDim.x) {
        out[blockIdx.x * d + i] = from_float<scalar_t>(act(to_float(x[i])) * to_float(x[d + i]));
    }
}
"""

NEW = """#include "common.cuh"

//@ kernel: act_and_mul
//@ grid: T
//@ block: min(D // VEC, 128)

extern "C" __global__ void act_and_mul(const scalar_t* x, scalar_t* out, int tokens, int d) {
    out[blockIdx.x * d + threadIdx.x] = x[threadIdx.x];
}
"""


def fence(code: str, info: str = "cuda", mark: str = "```") -> str:
    return f"{mark}{info}\n{code}{mark}\n"


# ---- extract_code -------------------------------------------------------------------------------

def test_the_new_kernel_after_a_quoted_longer_old_one_is_taken():
    answer = ("Your kernel was:\n\n" + fence(OLD) + "\nThe block is too large. Here is the rewrite:\n\n"
              + fence(NEW) + "\nThis halves the block size.")
    code, prose = extract_code(answer)
    assert code == NEW
    assert "halves the block size" in prose and "Here is the rewrite" in prose
    assert "act_and_mul" not in prose


def test_a_bash_block_before_the_kernel_is_neither_the_code_nor_prose():
    answer = "Build it with:\n" + fence("nvcc -O3 -arch=sm_90 kernel.cu\n", "bash") + "Kernel:\n" + fence(NEW)
    code, prose = extract_code(answer)
    assert code == NEW
    assert "nvcc" not in prose and "__global__" not in prose
    assert prose == "Build it with:\nKernel:"


@pytest.mark.parametrize("info", ["cu", "CUDA", "C++", "cpp", "", "cuda title=kernel.cu"])
def test_fence_labels_models_use(info):
    assert extract_code("Here:\n" + fence(NEW, info))[0] == NEW


def test_a_python_block_with_a_kernel_string_is_never_the_code():
    answer = fence('src = """__global__ void k() {}"""\n', "python") + fence(NEW, "cuda")
    assert extract_code(answer)[0] == NEW
    with pytest.raises(ValueError, match="no ```cuda code block"):
        extract_code(fence('src = """//@ kernel: k\n__global__ void k() {}"""\n', "python"))


def test_tilde_fences_and_crlf_line_endings():
    assert extract_code("Done:\n" + fence(NEW, "cuda", "~~~"))[0] == NEW
    code, prose = extract_code(("Done:\n" + fence(NEW) + "Bye.\n").replace("\n", "\r\n"))
    assert code == NEW and prose == "Done:\nBye."


def test_a_longer_fence_holds_a_three_backtick_line():
    inner = NEW + "// usage:\n```\n// launch with grid T\n"
    answer = "````cuda\n" + inner + "````\nThat is all."
    code, prose = extract_code(answer)
    assert code == inner and prose == "That is all."


def test_fenced_blocks_is_a_line_based_fence_parser():
    text = ("~~~markdown\n```cuda\nnot a fence here\n```\n~~~\n"
            "  ```CUDA extra words\nx\n``````\n"
            "````\nopen to the end\n```\n")
    assert fenced_blocks(text) == [
        Block("markdown", "```cuda\nnot a fence here\n```\n", True),
        Block("cuda", "x\n", True),
        Block("", "open to the end\n```\n", False),
    ]
    assert fenced_blocks("inline ```cuda x``` is not a fence") == []


def test_an_unclosed_block_with_a_complete_kernel_is_accepted():
    answer = "Here is the kernel:\n```cuda\n" + NEW  # cut off right after the last brace
    assert extract_code(answer)[0] == NEW


def test_an_unclosed_block_without_a_closing_brace_was_never_closed():
    cut = NEW[:NEW.index("{") + 1] + "\n    out[blockIdx.x * d + thr"
    with pytest.raises(ValueError, match="never closed"):
        extract_code("Here:\n" + fence(OLD) + "New:\n```cuda\n" + cut)


def test_a_decoy_block_inside_think_is_ignored():
    answer = ("<think>\nMaybe:\n" + fence(NEW.replace("128", "64")) + "No, better 128.\n</think>\n"
              "Final answer:\n" + fence(NEW))
    code, prose = extract_code(answer)
    assert code == NEW and prose == "Final answer:"
    assert extract_code("<THINKING>" + fence(OLD) + "</Thinking>" + fence(NEW))[0] == NEW


def test_a_global_kernel_without_directives_is_taken_when_it_is_the_only_code():
    plain = "__global__ void scale(float* x, float a, int n) {\n    x[threadIdx.x] *= a;\n}\n"
    assert extract_code("Try:\n" + fence(plain, "c") + fence("nvcc k.cu\n", "bash"))[0] == plain


def test_code_without_fences_and_answers_without_code():
    assert extract_code("\n" + NEW) == (NEW, "")
    with pytest.raises(ValueError, match="no ```cuda code block"):
        extract_code("I would reduce the block size to 128.")
    with pytest.raises(ValueError, match="no ```cuda code block"):
        extract_code(fence("int helper(int x) { return x; }\n"))


def test_strip_thinking():
    assert strip_thinking("<think>a {b}\nc</think>\r\nanswer\rmore") == "\nanswer\nmore"
    assert strip_thinking("the template opened it\n</think>\nanswer") == "\nanswer"
    assert strip_thinking("<think>\n" + NEW) == NEW  # never closed: only the tag goes


# ---- extract_json -------------------------------------------------------------------------------

Action = Literal["rewrite", "templatize", "tune", "stop"]


class Plan(BaseModel):
    action: Action
    rationale: str
    optimizations: list[str] = []

    @field_validator("action", mode="before")
    @classmethod
    def _choice(cls, value):
        return normalise_choice(value, get_args(Action))


def test_a_plan_after_thinking_with_braces():
    answer = ('<think>The state is {"best": 3.1} and {x}... maybe {"action": "tune"}</think>\n'
              '{"action": "rewrite", "rationale": "memory bound at 60%"}')
    plan = extract_json(answer, Plan)
    assert plan.action == "rewrite" and plan.rationale == "memory bound at 60%"


def test_braces_in_prose_around_the_plan():
    answer = ('I think {x} matters, and so does the {T, D} grid.\n'
              '{"action": "tune", "rationale": "uses \\"}\\" {braces} in a string"}\nHope {this helps.')
    plan = extract_json(answer, Plan)
    assert plan.action == "tune" and plan.rationale == 'uses "}" {braces} in a string'


def test_the_first_object_that_validates_wins():
    answer = ('Facts: {"geomean_us": 12.5, "action": "faster"}\n'
              'Decision: {"action": "stop", "rationale": "at bandwidth"}')
    assert extract_json(answer, Plan).action == "stop"


def test_trailing_commas_and_a_json_fence():
    answer = ('Here is my plan:\n```json\n{\n  "action": "templatize",\n  "rationale": "a, b,}",\n'
              '  "optimizations": ["vectorise", "unroll",],\n}\n```\n')
    plan = extract_json(answer, Plan)
    assert plan.action == "templatize" and plan.rationale == "a, b,}"
    assert plan.optimizations == ["vectorise", "unroll"]


def test_a_nested_plan_is_found():
    answer = '{"decision": {"action": "Tune", "rationale": "space not searched"}}'
    assert extract_json(answer, Plan).action == "tune"


@pytest.mark.parametrize("raw", ["Rewrite", " rewrite ", '"REWRITE"', "rewrite."])
def test_normalise_choice_through_a_before_validator(raw):
    answer = '{"action": %s, "rationale": "r"}' % __import__("json").dumps(raw)
    assert extract_json(answer, Plan).action == "rewrite"
    assert normalise_choice(raw, get_args(Action)) == "rewrite"


def test_garbage_and_wrong_plans_are_one_line_errors():
    with pytest.raises(ValueError, match="^no JSON object in the answer$"):
        extract_json("I am not sure {what you mean.", Plan)
    with pytest.raises(ValueError) as wrong:
        extract_json('Note {}.\n{"action": "optimise",\n "rationale": "' + "x" * 900 + '"}', Plan)
    message = str(wrong.value)
    assert "\n" not in message and len(message) <= 400
    assert message.startswith("no JSON object in the answer matches Plan: action:") and "optimise" in message


# ---- same_code ----------------------------------------------------------------------------------

def test_same_code_ignores_whitespace_and_comments():
    reformatted = (NEW.replace("    out[", "  /* one element */ out[").replace(" = ", "=")
                   .replace("{\n", "{  // the kernel\r\n") + "\n\n// end\n")
    assert same_code(NEW, reformatted)
    assert same_code('printf("a // b");', 'printf("a // b"); // done')
    assert not same_code('printf("a // b");', 'printf("a // c");')


def test_same_code_counts_directives_and_numbers():
    assert not same_code(NEW, NEW.replace("//@ block: min(D // VEC, 128)", "//@ block: min(D // VEC, 256)"))
    assert not same_code(NEW, NEW.replace("//@ grid: T", "// grid: T"))
    assert not same_code(NEW, NEW.replace("threadIdx.x] = x", "threadIdx.x + 1] = x"))
    assert not same_code("int x = 10;", "int x = 1;")
    assert not same_code("unsigned int x;", "unsignedint x;")
