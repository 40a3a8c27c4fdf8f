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
"""

from __future__ import annotations

from amp_tui.serving.spec import TOKEN_ID_BYTES


def token_bytes(hop, tokens: float, activation_bytes: float) -> float:
    return tokens * (activation_bytes + TOKEN_ID_BYTES if hop.activations else TOKEN_ID_BYTES)


def transfer_s(hop, tokens: float, activation_bytes: float) -> float:
    return token_bytes(hop, tokens, activation_bytes) / hop.bandwidth if hop.bandwidth > 0 else float("inf")


def link_wait_s(hop, decode_rate: float, prompt_rate: float, prompt_tokens: float, activation_bytes: float) -> float:
    """Mean wait for the link (rates over the whole cluster; the hop carries its share); inf when saturated."""
    prompt_send, token_send = transfer_s(hop, prompt_tokens, activation_bytes), transfer_s(hop, 1, activation_bytes)
    p, x = prompt_rate * hop.share, decode_rate * hop.share
    busy = p * prompt_send + x * token_send
    if busy >= 1:
        return float("inf")
    return (p * prompt_send ** 2 + x * token_send ** 2) / (2 * (1 - busy))


def decode_hop_s(hop, decode_rate: float, prompt_rate: float, prompt_tokens: float, activation_bytes: float) -> float:
    """A decode token's time on the hop: latency, its own transfer, its wait for the link."""
    return (hop.latency_s + transfer_s(hop, 1, activation_bytes)
            + link_wait_s(hop, decode_rate, prompt_rate, prompt_tokens, activation_bytes))


def prompt_hop_s(hop, decode_rate: float, prompt_rate: float, prompt_tokens: float, activation_bytes: float) -> float:
    return (hop.latency_s + transfer_s(hop, prompt_tokens, activation_bytes)
            + link_wait_s(hop, decode_rate, prompt_rate, prompt_tokens, activation_bytes))
