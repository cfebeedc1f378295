"""`nbl compress` and `nbl submit`'s refinement flags (compression.refit and compression.heal, nbl/refine_schema.py):
`--refit sequential`, `--heal-tokens N [--heal-steps N] [--heal-lr X] [--heal-seconds S]`. Checked by the request's
own schema, so the CLI refuses (exit 2) what the API would refuse (422), with the same words."""

from __future__ import annotations

from pydantic import ValidationError

from nbl import recipe as R
from nbl.refine_schema import HEAL_LR, REFITS, HealSpec, refine_error


def add_refine_options(p, defaults: bool = True) -> None:
    """`defaults` False (submit): unset flags stay None, so a request file's values are not overridden."""
    g = p.add_argument_group("refinement of the maps (compression.refit, compression.heal)")
    g.add_argument(
        "--refit",
        choices=REFITS,
        default=R.Compression.__dataclass_fields__["refit"].default if defaults else None,
        help="sequential: refit the replaced layers in depth order on the compressed model's own "
        "activations (one more pass over the calibration data); default none",
    )
    g.add_argument(
        "--heal-tokens",
        type=int,
        metavar="N",
        help="heal: train the maps against the base's next-token "
        "distribution on N calibration-dataset tokens after the calibration's (a tenth held out)",
    )
    g.add_argument("--heal-steps", type=int, metavar="N", help="heal: optimiser steps of one block (default one pass)")
    g.add_argument(
        "--heal-lr",
        type=float,
        metavar="X",
        help=f"heal: Adam's peak learning rate, falling to 0 on a cosine (default {HEAL_LR:g})",
    )
    g.add_argument("--heal-seconds", type=float, metavar="S", help="heal: stop each output's training after S seconds")


def heal_request(args) -> dict | None:
    """The request's compression.heal of the flags (None: no healing); a flag without --heal-tokens is refused."""
    extra = {"steps": args.heal_steps, "lr": args.heal_lr, "max_seconds": args.heal_seconds}
    if args.heal_tokens is None:
        given = [f"--heal-{k.replace('max_', '')}" for k, v in extra.items() if v is not None]
        if given:
            raise ValueError(f"{', '.join(given)} needs --heal-tokens: the tokens to heal on")
        return None
    return {"tokens": args.heal_tokens, **{k: v for k, v in extra.items() if v is not None}}


def refine_from_args(args, form: str, method: str) -> tuple[str, R.Heal | None]:
    """(refit, heal) of `nbl compress`'s flags, checked as the API checks a request."""
    body = heal_request(args)
    heal = None
    if body is not None:
        try:
            heal = R.Heal(**HealSpec.model_validate(body).model_dump())
        except ValidationError as e:
            err = e.errors()[0]
            raise ValueError(f"--heal-{str(err['loc'][-1]).replace('max_', '')}: {err['msg']}") from None
    refit = args.refit or R.Compression.__dataclass_fields__["refit"].default
    why = refine_error(form, method, refit, heal is not None)
    if why is not None:
        raise ValueError(why)
    return refit, heal
