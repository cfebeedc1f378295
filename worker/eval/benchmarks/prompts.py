"""lm-eval's prompts for the built-in tasks, as pure functions of a Hub-schema document.

Each copies the task's YAML in lm-eval (0.4.x, lm_eval/tasks/...): doc_to_text is the context,
doc_to_choice the choices (scored after a space, the default target delimiter), doc_to_target the
label. tests/worker/eval/test_eval_lmeval_parity.py checks them against lm-eval's own rendering.
"""

from __future__ import annotations

import re

from .task import Doc, choice_doc, multiple_input_doc

MMLU_LETTERS = ["A", "B", "C", "D"]
MMLU_SHOTS = 5


def arc(doc: dict) -> Doc:  # arc/arc_easy.yaml (arc_challenge includes it)
    return choice_doc(
        f"Question: {doc['question']}\nAnswer:", doc["choices"]["text"], doc["choices"]["label"].index(doc["answerKey"])
    )


def openbookqa(doc: dict) -> Doc:  # openbookqa/openbookqa.yaml
    return choice_doc(
        doc["question_stem"], doc["choices"]["text"], doc["choices"]["label"].index(doc["answerKey"].lstrip())
    )


def boolq(doc: dict) -> Doc:  # super_glue/boolq/default.yaml
    return choice_doc(f"{doc['passage']}\nQuestion: {doc['question']}?\nAnswer:", ["no", "yes"], int(doc["label"]))


def piqa(doc: dict) -> Doc:  # piqa/piqa.yaml
    return choice_doc(f"Question: {doc['goal']}\nAnswer:", [doc["sol1"], doc["sol2"]], int(doc["label"]))


def winogrande(doc: dict) -> Doc:  # winogrande/default.yaml + preprocess_winogrande.py (multiple_input)
    """Each option fills the blank: the contexts are the sentence up to the blank with each option,
    the one continuation the rest after a space; the gold option is answer "1" or "2"."""
    idx = doc["sentence"].index("_")
    contexts = [doc["sentence"][:idx] + opt for opt in (doc["option1"], doc["option2"])]
    return multiple_input_doc(contexts, " " + doc["sentence"][idx + 1 :].strip(), {"1": 0, "2": 1}[doc["answer"]])


def hellaswag_preprocess(text: str) -> str:
    """hellaswag/utils.py `preprocess`: strip WikiHow bracket tags."""
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def hellaswag(doc: dict) -> Doc:  # hellaswag/hellaswag.yaml + utils.process_docs
    ctx = doc["ctx_a"] + " " + doc["ctx_b"].capitalize()
    return choice_doc(
        hellaswag_preprocess(doc["activity_label"] + ": " + ctx),
        [hellaswag_preprocess(e) for e in doc["endings"]],
        int(doc["label"]),
    )


def lambada(doc: dict) -> Doc:  # lambada/lambada_openai.yaml: the last word after a space
    words = doc["text"].split(" ")
    target = " " + words[-1]
    return Doc(" ".join(words[:-1]), (target,), 0, (len(target),))


def mmlu_text(doc: dict) -> str:  # mmlu/default/_default_template_yaml
    c = doc["choices"]
    return f"{doc['question'].strip()}\nA. {c[0]}\nB. {c[1]}\nC. {c[2]}\nD. {c[3]}\nAnswer:"


def mmlu_description(subject: str) -> str:  # mmlu/default/mmlu_<subject>.yaml
    return f"The following are multiple choice questions (with answers) about {subject.replace('_', ' ')}.\n\n"


def mmlu(doc: dict, shots: list[dict]) -> Doc:
    """5-shot MMLU: the subject's description, then its first dev questions answered (sampler first_n)."""
    examples = "".join(f"{mmlu_text(s)} {MMLU_LETTERS[s['answer']]}\n\n" for s in shots)
    return choice_doc(mmlu_description(doc["subject"]) + examples + mmlu_text(doc), MMLU_LETTERS, doc["answer"])
