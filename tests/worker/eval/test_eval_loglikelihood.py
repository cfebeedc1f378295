"""The scorer: lm-eval's token split and log-likelihoods, checked by hand on a bigram model."""

import pytest
import torch
from eval_helpers import BigramLM, bpe_tokenizer
from testkit.models import tiny_model, tiny_tokenizer

from worker.eval.loglikelihood import loglikelihoods, score
from worker.eval.token_split import encode_pair, max_length

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def bigram():
    torch.manual_seed(0)
    return BigramLM(torch.randn(128, 128) * 3, window=64)


def test_trailing_space_moves_to_the_continuation():
    tok = tiny_tokenizer()  # one token per character
    ctx, cont = encode_pair(tok, "Answer: ", "yes")
    assert ctx == tok.encode("Answer:") and cont == tok.encode(" yes")


def test_a_merge_across_the_boundary_is_charged_to_the_continuation():
    tok = bpe_tokenizer()
    # find a word the BPE keeps whole, then split it between context and continuation
    word = next(w for w in [" the", " water", " energy", " plants"] if len(tok.encode(w)) == 1)
    ctx, cont = encode_pair(tok, "Question:" + word[:2], word[2:] + " is")
    whole = tok.encode("Question:" + word + " is")
    assert ctx == tok.encode("Question:" + word[:2])
    assert cont == whole[len(ctx) :]  # lm-eval's rule, even though ctx is not a prefix of whole
    assert whole[: len(ctx)] != ctx


def test_empty_context_is_the_bos_token():
    tok = tiny_tokenizer()
    ctx, cont = encode_pair(tok, "", "ab")
    assert ctx == [tok.bos_token_id] and cont == tok.encode("ab")


def test_loglikelihood_and_greedy_by_hand(bigram):
    tok = tiny_tokenizer()
    pairs = [("The cat", " sat"), ("The cat", " ran"), ("x", "yz"), ("Answer: ", "no")]
    got = loglikelihoods(bigram, tok, pairs)
    for (c, k), (ll, greedy) in zip(pairs, got):
        ctx, cont = encode_pair(tok, c, k)
        ids = ctx + cont
        assert ll == pytest.approx(bigram.ll(ids, len(ctx)), abs=1e-5)
        argmax = [int(bigram.table[ids[t - 1]].argmax()) for t in range(len(ctx), len(ids))]
        assert greedy == (argmax == cont)


def test_greedy_true_when_every_token_is_the_argmax(bigram):
    tok = tiny_tokenizer()
    first = tok.encode("q")
    chain = first + [int(bigram.table[first[-1]].argmax())]
    chain.append(int(bigram.table[chain[-1]].argmax()))
    ((ll, greedy),) = score(bigram, [(chain[:1], chain[1:])], window=64)
    assert greedy and ll == pytest.approx(bigram.ll(chain, 1), abs=1e-5)


def test_long_inputs_are_cut_from_the_left(bigram):
    # window 8: the model reads (ctx + cont)[-9:][:-1]; a bigram model's scores do not change,
    # but a continuation longer than the window is refused, as lm-eval refuses it
    small = BigramLM(bigram.table.data.exp(), window=8)
    ctx, cont = list(range(3, 23)), [5, 6, 7]
    ((ll, _),) = score(small, [(ctx, cont)], window=8)
    assert ll == pytest.approx(small.ll(ctx + cont, len(ctx)), abs=1e-5)
    with pytest.raises(ValueError):
        score(small, [(ctx, list(range(3, 13)))], window=8)


def test_requests_with_the_same_input_share_one_forward(bigram):
    tok = tiny_tokenizer()
    pairs = [("Q: 1+1?\nAnswer:", f" {c}") for c in "ABCD"]
    loglikelihoods(bigram, tok, pairs, batch_tokens=1)  # one row per batch
    assert bigram.calls == 1


def test_batching_and_padding_do_not_change_scores():
    model, tok = tiny_model(vocab=128), tiny_tokenizer()
    pairs = [
        ("Question: why is the sky blue?\nAnswer:", " light"),
        ("Hi", " there, friend"),
        ("A longer context that runs on for a while", " ok"),
        ("Hi", " you"),
    ]
    one = loglikelihoods(model, tok, pairs, batch_tokens=1)
    many = loglikelihoods(model, tok, pairs, batch_tokens=4096)
    for (a, ga), (b, gb) in zip(one, many):
        assert a == pytest.approx(b, abs=1e-4) and ga == gb
    with torch.no_grad():  # and equal to scoring each pair alone, by hand
        for (c, k), (ll, _) in zip(pairs, many):
            ctx, cont = encode_pair(tok, c, k)
            logp = model(torch.tensor([ctx + cont])).logits[0].log_softmax(-1)
            hand = sum(float(logp[len(ctx) + i - 1, t]) for i, t in enumerate(cont))
            assert ll == pytest.approx(hand, abs=1e-4)


def test_max_length_follows_lm_eval():
    tok = tiny_tokenizer()
    assert max_length(tiny_model(max_position_embeddings=96), tok) == 96


def test_shared_prefixes_run_once_and_change_nothing():
    model, tok = tiny_model(vocab=128, max_position_embeddings=512), tiny_tokenizer()
    shots = "".join(f"Example {i}: the answer is {'ABCD'[i % 4]}.\n\n" for i in range(4))  # a long common prefix
    pairs = [(shots + f"Question {q}?\nAnswer:", f" {c}") for q in range(3) for c in "ABCD"]
    pairs += [("short", " one"), (shots + "Tell", " me more about it")]
    whole = loglikelihoods(model, tok, pairs, share_prefix=False)
    for batch_tokens in (4096, 40):
        shared = loglikelihoods(model, tok, pairs, batch_tokens=batch_tokens, share_prefix=True)
        for (a, ga), (b, gb) in zip(whole, shared):
            assert a == pytest.approx(b, abs=1e-4) and ga == gb


def test_plan_batches_groups_inputs_with_a_common_prefix():
    from worker.eval.loglikelihood import plan_batches

    prefix = tuple(range(100, 140))  # 40 tokens
    inputs = {prefix + (1, 2): 1, prefix + (3,): 1, prefix + (4, 5, 6): 2, (7, 8): 1}
    batches = plan_batches(inputs, batch_tokens=1000, min_shared=32)
    shared = [b for b in batches if b[0]]
    assert len(shared) == 1 and shared[0][0] == 40 and len(shared[0][1]) == 3
    assert [b for b in batches if not b[0]] == [(0, [(7, 8)])]
    # a prefix may not swallow a scored position: (4, 5, 6) scores its last 2, so <= 41 shared
    assert plan_batches({prefix + (4, 5, 6): 2, prefix + (4, 5, 9): 2}, 1000, 32)[0][0] == 41
    # consecutive batches keep one prefix when the later could share more: its cache is reused
    four = {prefix + (1, 5, 5): 1, prefix + (2, 5, 5): 1, prefix + (3, 7, 7): 1, prefix + (3, 7, 8): 1}
    batches = plan_batches(four, batch_tokens=6, min_shared=32)  # two rows a batch
    assert [len(rows) for _, rows in batches] == [2, 2]
    assert [s for s, _ in batches] == [40, 40]  # not 42 for the second, though its rows share 42
    assert [s for s, _ in plan_batches(four, batch_tokens=1000, min_shared=32)] == [40]
    # below min_shared nothing is shared
    assert all(s == 0 for s, _ in plan_batches(inputs, 1000, min_shared=64))


def test_a_cached_prefix_is_reused_only_when_identical():
    from worker.eval.loglikelihood import _prefix_cache

    model = tiny_model(vocab=128)
    prefix = tuple(range(3, 43))
    memo = {}
    first = _prefix_cache(model, prefix, "cpu", memo)
    first.batch_repeat_interleave(3)  # the caller's copy changes; the memo's must not
    again = _prefix_cache(model, prefix, "cpu", memo)
    fresh = _prefix_cache(model, prefix, "cpu", {})
    for a, b in zip(again.layers, fresh.layers):
        assert a.keys.shape[0] == 1
        torch.testing.assert_close(a.keys, b.keys)
        torch.testing.assert_close(a.values, b.values)
    other = tuple(range(4, 40))
    _prefix_cache(model, other, "cpu", memo)
    assert memo["prefix"] == other


@pytest.mark.parametrize("mode", ["attn", "block"])
def test_shared_prefixes_on_a_compressed_model_with_layer_0_replaced(mode):
    from worker.engine.forms import surgery

    model, tok = tiny_model(vocab=128, max_position_embeddings=512), tiny_tokenizer()
    surgery.apply(model, surgery.Plan(mode, "drop", (0, 2)))  # layer 0: its cache slot holds nothing
    shots = "".join(f"Example {i}: the answer is {'ABCD'[i % 4]}.\n\n" for i in range(4))
    pairs = [(shots + f"Question {q}?\nAnswer:", f" {c} then") for q in range(3) for c in "ABCD"]
    whole = loglikelihoods(model, tok, pairs, share_prefix=False)
    shared = loglikelihoods(model, tok, pairs, share_prefix=True)
    for (a, ga), (b, gb) in zip(whole, shared):
        assert a == pytest.approx(b, abs=1e-4) and ga == gb


def test_an_input_cut_to_the_window_keeps_the_tokenizers_prefix():
    from worker.eval.loglikelihood import model_input

    ctx, cont = [0, *range(3, 23)], [5, 6, 7]  # a context opening with <bos> (id 0)
    assert model_input(ctx, cont, 8) == tuple((ctx + cont)[-9:-1])  # no prefix: cut as lm-eval cuts
    assert model_input(ctx, cont, 8, (0,)) == (0, *(ctx + cont)[-8:-1])  # the prefix, then the last 7
    assert model_input(ctx[:5], cont, 8, (0,)) == tuple((ctx[:5] + cont)[:-1])  # not cut: as it is
    assert model_input(ctx[1:], cont, 8, (0,)) == tuple((ctx[1:] + cont)[-9:-1])  # opens without it
    with pytest.raises(ValueError, match="after its 1-token prefix"):
        model_input(ctx, list(range(3, 11)), 8, (0,))  # 8 continuation tokens: no room beside <bos>
    assert len(model_input(ctx, list(range(3, 10)), 8, (0,))) == 8


def test_a_long_task_input_on_a_bos_tokenizer_is_read_after_bos():
    model, tok = tiny_model(vocab=128, max_position_embeddings=16), tiny_tokenizer(bos=True)
    pairs = [("A context much longer than the sixteen-token window", " ends")]
    ((ll, _),) = loglikelihoods(model, tok, pairs)
    ctx, cont = encode_pair(tok, *pairs[0])
    assert ctx[0] == 0
    inp = [0, *(ctx + cont)[-16:-1]]  # 16 tokens: <bos> and the last 15 the model reads
    with torch.no_grad():
        logp = model(torch.tensor([inp])).logits[0].log_softmax(-1)
    hand = sum(float(logp[16 - len(cont) + i, t]) for i, t in enumerate(cont))  # position 15 predicts the last
    assert ll == pytest.approx(hand, abs=1e-5)
