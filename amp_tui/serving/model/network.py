"""A hop between machines (or to and from the coordinator): what a token pays to cross it.

  latency       the link's one-way latency
  transfer      bytes / bandwidth: a decode token carries one token's activations (hidden size x
                precision) between machines, a prompt all its tokens'; to and from the coordinator
                only token ids (2 bytes each)
  queueing      a link sends one request at a time, first come first served, so a token waits for the
                sends ahead of it: with prompts crossing at p/s (transfer S_p) and decode tokens at
                x/s (S_d), the link is busy u = p S_p + x S_d and a request waits
                (p S_p^2 + x S_d^2) / (2 (1 - u)) (Pollaczek-Khinchine). On slow links between regions
                (about 12.5 MB/s) a 750-token prompt of a 70B model takes a second to send, so this
                is the term that decides how many requests may cross there

Each function takes one hop, or the hops' fields as numpy arrays (model/roundtrip.py prices them all at once).
"""

from __future__ import annotations

import numpy as np

from amp_tui.serving.spec import TOKEN_ID_BYTES


def token_bytes(hop, tokens, activation_bytes: float):
    """Bytes `tokens` tokens carry over the hop (numbers, or numpy arrays of hops' fields)."""
    return tokens * np.where(hop.activations, activation_bytes + TOKEN_ID_BYTES, TOKEN_ID_BYTES)


def transfer_s(hop, tokens, activation_bytes: float):
    with np.errstate(divide="ignore"):
        return np.where(np.asarray(hop.bandwidth) > 0, token_bytes(hop, tokens, activation_bytes) / hop.bandwidth,
                        np.inf)


def link_wait_s(hop, decode_rate: float, prompt_rate: float, prompt_tokens: float, activation_bytes: float):
    """Mean wait for the link (rates over the whole cluster; the hop carries its share); inf when saturated."""
    return queue_wait_s(transfer_s(hop, prompt_tokens, activation_bytes), transfer_s(hop, 1, activation_bytes),
                        hop.share, decode_rate, prompt_rate)


def queue_wait_s(prompt_send, token_send, share, decode_rate: float, prompt_rate: float):
    """Pollaczek-Khinchine: prompts (prompt_send s each) and tokens (token_send s each) crossing a link that
    carries `share` of the cluster's decode_rate and prompt_rate, first come first served."""
    p, x = prompt_rate * share, decode_rate * share
    busy = p * prompt_send + x * token_send
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(busy >= 1, np.inf, (p * prompt_send ** 2 + x * token_send ** 2) / (2 * (1 - busy)))


def decode_hop_s(hop, decode_rate: float, prompt_rate: float, prompt_tokens: float, activation_bytes: float):
    """A decode token's time on the hop: latency, its own transfer, its wait for the link."""
    return (hop.latency_s + transfer_s(hop, 1, activation_bytes)
            + link_wait_s(hop, decode_rate, prompt_rate, prompt_tokens, activation_bytes))


def prompt_hop_s(hop, decode_rate: float, prompt_rate: float, prompt_tokens: float, activation_bytes: float):
    return (hop.latency_s + transfer_s(hop, prompt_tokens, activation_bytes)
            + link_wait_s(hop, decode_rate, prompt_rate, prompt_tokens, activation_bytes))
