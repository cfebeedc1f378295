"""What a tokenizer puts before a text: found by encoding with and without special tokens."""

from testkit.models import tiny_tokenizer

from worker.engine.text_prefix import strip_prefix, text_prefix


def test_a_bos_adding_tokenizer_has_its_bos_as_prefix_and_a_plain_one_none():
    assert text_prefix(tiny_tokenizer(bos=True)) == (0,)
    assert text_prefix(tiny_tokenizer()) == ()


def test_a_longer_prefix_and_a_suffix_are_told_apart():
    from tokenizers import processors

    tok = tiny_tokenizer()
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> <unk> $A </s>", special_tokens=[("<s>", 0), ("</s>", 1), ("<unk>", 2)]
    )
    assert tok("ab")["input_ids"] == [0, 2, *tok("ab", add_special_tokens=False)["input_ids"], 1]
    assert text_prefix(tok) == (0, 2)  # the EOS after the text is no prefix


def test_strip_prefix_takes_off_only_a_prefix_that_is_there():
    assert strip_prefix([0, 5, 6], (0,)) == [5, 6]
    assert strip_prefix([5, 6], (0,)) == [5, 6]
    assert strip_prefix([0, 5, 6], ()) == [0, 5, 6]
