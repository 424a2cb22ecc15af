# Lone surrogates (U+D800 to U+DFFF unpaired), which a Python string may hold but no UTF-8 file,
# in what a submission's own text reaches: its printed output at import and in a call, an
# exception's message, and a returned dict's key. No frame is forged: the child's own encoder
# escapes them as \udXXX, and the grader decodes them back. Each escape is six characters, so long
# runs of them (and a key near the 100-character limit) must be counted as escaped, or the grader
# would refuse the frame and lose every call after it. The base is the stub.
print("printed at import: \ud800" + "\ud800" * 700)


def scores(q, k):
    return {"key \udc80": 1.0, "k\udc80" + "x" * 98: 2.0}


def head_facts(t, d_k, d_v):
    print("printed in a call: \udcff" * 300)
    raise RuntimeError("raised in a call: \ud83d" * 50)
