"""The head as the chapter computes it in §15.6, one function per step that another builds on:
what stands in for a failing earlier step when a later step is called again (see inside.py). It is
the chapter's printed computation and nothing more (the tests check that it agrees with the
reference). The grader reads it as text and sends a job that calls steps again the functions it
names; no worker has it in view, and nothing that grades imports it.
"""
import numpy as np


def project_qkv(x, w_q, w_k, w_v):
    return x @ w_q, x @ w_k, x @ w_v


def scores(q, k):
    return q @ np.swapaxes(k, -1, -2)


def scale(d, d_k):
    return d / np.sqrt(d_k)


def softmax_rows(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def mix(a, v):
    return a @ v


def attention(q, k, v):
    a = softmax_rows(scale(scores(q, k), q.shape[-1]))
    return mix(a, v), a


def self_attention_head(x, w_q, w_k, w_v):
    q, k, v = project_qkv(x, w_q, w_k, w_v)
    return attention(q, k, v)
