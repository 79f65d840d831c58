"""Offline replica of the server's hybrid ranking on LoCoMo, for trying retrieval methods
in seconds (BENCHMARKS.md, "Retrieval, round three"). It reproduces the server's figures
(BM25 with the context field, z-score fusion, smoothed similarity, the participant prior)
from what `memmachine-bench locomo-dump` writes, then scores each method on the tuning
split (conversations 0-4), the check split (5-9) and all ten.

    target/release/memmachine-bench locomo-dump --out /tmp/locomo-dump
    pip install numpy snowballstemmer
    python3 bench/retrieval_lab.py /tmp/locomo-dump [--bench target/release/memmachine-bench]
"""
import argparse, json, os, re, subprocess, sys
import calendar, datetime as dt
import numpy as np

K1, B, DIM, WINDOW = 1.2, 0.75, 384, 2


def vectors(path):
    v = np.fromfile(path, dtype="<f4").reshape(-1, DIM)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def window_sum(a, w=WINDOW):
    n = len(a)
    cs = np.concatenate([[0.0], np.cumsum(a)])
    i = np.arange(n)
    return cs[np.minimum(i + w, n - 1) + 1] - cs[np.maximum(i - w, 0)]


def load(d):
    meta = json.load(open(f"{d}/meta.json"))
    tv, tp = vectors(f"{d}/turns.f32"), vectors(f"{d}/turns_prev.f32")
    qv = vectors(f"{d}/questions.f32")
    owners = np.array(json.load(open(f"{d}/sentences.json")))
    sv = vectors(f"{d}/sentences.f32")
    ti = qi = 0
    for c in meta:
        n, m = len(c["turns"]), len(c["questions"])
        c["tv"], c["tp"], c["qv"] = tv[ti:ti + n], tp[ti:ti + n], qv[qi:qi + m]
        mask = (owners >= ti) & (owners < ti + n)
        c["sv"], c["sown"] = sv[mask], owners[mask] - ti
        ti, qi = ti + n, qi + m
        vocab, rows = {}, []
        for t in c["turns"]:
            counts = {}
            for tok in t["tokens"]:
                j = vocab.setdefault(tok, len(vocab))
                counts[j] = counts.get(j, 0) + 1
            rows.append(counts)
        tf = np.zeros((n, len(vocab)))
        for i, r in enumerate(rows):
            for j, k in r.items():
                tf[i, j] = k
        ctf = np.stack([window_sum(tf[:, j]) for j in range(tf.shape[1])], axis=1)
        c.update(vocab=vocab, tf=tf, ctf=ctf, lens=tf.sum(1), df=(tf > 0).sum(0),
                 cdf=(ctf > 0).sum(0), speaker=np.array([t["speaker"] for t in c["turns"]]),
                 session=np.array([t["session"] for t in c["turns"]]),
                 dia={t["dia_id"]: i for i, t in enumerate(c["turns"])})
        c["clens"] = window_sum(c["lens"])
        c["avg_len"] = c["lens"].mean()
        c["avg_clen"] = c["avg_len"] * min(2 * WINDOW + 1, n)
        c["time"] = [turn_time(t["text"]) for t in c["turns"]]
        c["event"] = np.array([(t["ts"] or 0) + off * 86400 for t, (_, off) in zip(c["turns"], c["time"])])
        c["says_when"] = np.array([m for m, _ in c["time"]], dtype=float)
        for q in c["questions"]:
            q["period"], q["when"] = question_period(q["text"]), asks_when(q["text"])
    return meta


def idf(n, df):
    return np.log(1 + (n - df + 0.5) / (df + 0.5))


def bm25(c, terms, weights=None):
    n = len(c["lens"])
    s = np.zeros(n)
    for k, t in enumerate(terms):
        j = c["vocab"].get(t)
        if j is None:
            continue
        w = 1.0 if weights is None else weights[k]
        tf, ctf = c["tf"][:, j], c["ctf"][:, j]
        s += w * idf(n, c["df"][j]) * tf * (K1 + 1) / (tf + K1 * (1 - B + B * c["lens"] / c["avg_len"]))
        s += w * 2 * idf(n, c["cdf"][j]) * ctf * (K1 + 1) / (ctf + K1 * (1 - B + B * c["clens"] / c["avg_clen"]))
    return s


def z(x):
    sd = x.std()
    return (x - x.mean()) / sd if sd > 1e-12 else np.zeros_like(x)


# --- time, as crates/domain/src/retrieval/time_expressions.rs reads it ------------------
MONTHS = "january february march april may june july august september october november december".split()
WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
UNITS = {"day": 1, "days": 1, "week": 7, "weeks": 7, "month": 30, "months": 30, "year": 365, "years": 365}
SPANS = "weekend night morning evening summer winter spring fall".split()
NUMBERS = dict(a=1, an=1, one=1, two=2, three=3, four=4, five=5, six=6, seven=7, eight=8, nine=9, ten=10, few=3)


def words(text):
    return [w.lower() for w in re.split(r"[^0-9A-Za-z]+", text) if w]


def year(w):
    return int(w) if len(w) == 4 and w.isdigit() and 1900 <= int(w) <= 2100 else None


def day(w):
    m = re.fullmatch(r"(\d{1,2})(st|nd|rd|th)?", w)
    return int(m.group(1)) if m and 1 <= int(m.group(1)) <= 31 else None


def question_period(q):
    ws = words(q)
    skip = [False] * len(ws)
    for i in range(len(ws) - 1):
        if ws[i] == "as" and ws[i + 1] == "of":
            for k in range(i, min(i + 5, len(ws))):
                skip[k] = True
    kept = [w for w, s in zip(ws, skip) if not s]
    any_year = next((year(w) for w in kept if year(w)), None)
    spans = []
    for i, w in enumerate(kept):
        if w not in MONTHS:
            continue
        before = day(kept[i - 1]) if i > 0 else None
        after = day(kept[i + 1]) if i + 1 < len(kept) else None
        given = next((year(x) for x in kept[i + 1:i + 4] if year(x)), None)
        if w == "may" and not (before or after or given):
            continue
        y = given or any_year
        if not y:
            continue
        m = MONTHS.index(w) + 1
        d = before or after
        try:
            if d:
                s = dt.datetime(y, m, d); e = s + dt.timedelta(days=1)
            else:
                s = dt.datetime(y, m, 1); e = s + dt.timedelta(days=calendar.monthrange(y, m)[1])
        except ValueError:
            continue
        spans.append((s, e))
    if spans:
        s, e = min(a for a, _ in spans), max(b for _, b in spans)
    elif any_year:
        s, e = dt.datetime(any_year, 1, 1), dt.datetime(any_year + 1, 1, 1)
    else:
        return None
    utc = lambda x: x.replace(tzinfo=dt.timezone.utc).timestamp()
    return utc(s), utc(e)


def asks_when(q):
    ws = words(q)[:12]
    if ws and ws[0] == "when":
        return True
    return any((a in ("what", "which") and b in ("year", "month", "date", "day", "time"))
               or (a == "how" and b == "long") or (a == "when" and b in ("did", "was", "is", "will", "does", "do"))
               for a, b in zip(ws, ws[1:]))


def turn_time(text):
    ws = words(text)
    mentions, offset = False, None
    for i, w in enumerate(ws):
        nxt = ws[i + 1] if i + 1 < len(ws) else ""
        if w in ("yesterday", "today", "tonight", "tomorrow", "recently", "ago") or w in WEEKDAYS or year(w):
            mentions = True
        if w in MONTHS and (w != "may" or day(nxt) or year(nxt)):
            mentions = True
        if w in ("last", "next", "this", "past", "coming", "other") and (nxt in UNITS or nxt in SPANS or nxt in WEEKDAYS):
            mentions = True
        if offset is not None:
            continue
        pair = {("last", "night"): -1, ("last", "week"): -7, ("last", "weekend"): -7, ("next", "week"): 7,
                ("next", "weekend"): 7, ("last", "month"): -30, ("next", "month"): 30,
                ("last", "year"): -365, ("next", "year"): 365}
        if w == "yesterday":
            offset = -1
        elif w == "tomorrow":
            offset = 1
        elif (w, nxt) in pair:
            offset = pair[(w, nxt)]
        else:
            n = int(w) if w.isdigit() and int(w) <= 1000 else NUMBERS.get(w)
            if n is not None and nxt in UNITS and i + 2 < len(ws) and ws[i + 2] == "ago":
                offset = -n * UNITS[nxt]
    return mentions, max(-3650, min(3650, offset or 0))


# --- the ranking, with every method as an option ---------------------------------------
def score(c, qi, q, o, lab):
    qv = c["qv"][qi]
    lex = bm25(c, q["terms"])
    sim = c["tv"] @ qv
    if o.get("sentences"):
        best = np.full(len(sim), -np.inf)
        np.maximum.at(best, c["sown"], c["sv"] @ qv)
        sim = sim + o["sentences"] * np.where(np.isfinite(best), best, sim)
    if o.get("contextual"):
        sim = sim + o["contextual"] * (c["tp"] @ qv)
    own = o.get("own", 4.0)
    smoothed = window_sum(sim) + (own - 1) * sim
    fused = z(lex) + o.get("dense", 1.0) * z(smoothed)
    if o.get("expand"):
        ex = lab.expansions(c, q["text"])
        if ex:
            fused += o["expand"] * z(bm25(c, list(ex), list(ex.values())))
    if o.get("prf"):
        top = np.argsort(-(c["tv"] @ qv))[:10]
        w = np.zeros(len(sim)); w[top] = 1
        n = len(sim)
        sc = (w[:, None] * c["tf"] / np.maximum(c["lens"][:, None], 1)).sum(0) * idf(n, c["df"])
        inv = {j: t for t, j in c["vocab"].items()}
        terms = [inv[j] for j in np.argsort(-sc) if len(inv[j]) > 2 and inv[j] not in q["terms"]][:10]
        fused += o["prf"] * z(bm25(c, terms))
    if q["named"]:
        fused += o.get("participant", 3.0) * np.isin(c["speaker"], q["named"])
    if o.get("time") and q["period"]:
        s, e = q["period"]
        slack = 10 * 86400
        fused += o["time"] * ((c["event"] >= s - slack) & (c["event"] < e + slack))
    if o.get("when") and q["when"]:
        fused += o["when"] * c["says_when"]
    if o.get("session"):
        best = np.array([fused[c["session"] == s].max() for s in c["session"]])
        fused += o["session"] * z(best)
    return fused


def recall(convs, o, ids, lab, ks=(5, 10, 20)):
    tot, n, cats = np.zeros(len(ks)), 0, {}
    for ci, c in enumerate(convs):
        if ci not in ids:
            continue
        for qi, q in enumerate(c["questions"]):
            order = np.argsort(-score(c, qi, q, o, lab), kind="stable")
            pos = {int(s): r for r, s in enumerate(order[:max(ks)])}
            ev = [c["dia"][e] for e in q["evidence"]]
            r = np.array([sum(1 for e in ev if pos.get(e, 1e9) < k) / len(ev) for k in ks])
            tot += r; n += 1
            acc = cats.setdefault(q["category"], [0.0, 0])
            acc[0] += r[1]; acc[1] += 1
    return tot / n, {k: v[0] / v[1] for k, v in sorted(cats.items())}


class Lab:
    """Word vectors for expansion (each corpus word embedded alone by the same model)."""

    def __init__(self, d, bench):
        import snowballstemmer
        self.stem = snowballstemmer.stemmer("english").stemWord
        path = f"{d}/words.json"
        if not os.path.exists(path + ".f32"):
            meta = json.load(open(f"{d}/meta.json"))
            ws = sorted({w for c in meta for t in c["turns"] + c["questions"]
                         for w in words(t.get("speaker", "") + " " + t["text"]) if len(w) >= 3 and w.isalpha()})
            json.dump(ws, open(path, "w"))
            subprocess.run([bench, "locomo-dump", "--out", d, "--texts", path], check=True)
        self.words = json.load(open(path))
        self.vectors = vectors(path + ".f32")
        self.index = {w: i for i, w in enumerate(self.words)}
        self.stems = [self.stem(w) for w in self.words]

    def expansions(self, c, question, k=3, threshold=0.6):
        out, names = {}, {s.lower() for s in c["speakers"]}
        qwords = words(question)
        for w in qwords:
            if w in STOPWORDS or w not in self.index or w in names:
                continue
            sims = self.vectors @ self.vectors[self.index[w]]
            for j in np.argsort(-sims)[:3 * k]:
                s = self.stems[j]
                if sims[j] < threshold:
                    break
                if s != self.stem(w) and s in c["vocab"] and self.words[j] not in STOPWORDS:
                    out[s] = max(out.get(s, 0.0), float(sims[j]))
        return out


STOPWORDS = set()

METHODS = [
    ("round two (the server before)", {}),
    ("+ time: the question's period (3)", {"time": 3}),
    ("+ time: and when-questions (1) [kept]", {"time": 3, "when": 1}),
    ("  + session as a whole (0.5)", {"time": 3, "when": 1, "session": 0.5}),
    ("  + weights tuned on 0-4 (dense 1.2, participant 4, own 6)", {"time": 3, "when": 1, "dense": 1.2, "participant": 4, "own": 6}),
    ("  + pseudo-relevance feedback (10 terms of the dense top 10, 0.3)", {"time": 3, "when": 1, "prf": 0.3}),
    ("  + contextual embeddings (previous turn, 0.5)", {"time": 3, "when": 1, "contextual": 0.5}),
    ("  + sentence vectors (best sentence, 1)", {"time": 3, "when": 1, "sentences": 1.0}),
    ("  + word-vector query expansion (0.3)", {"time": 3, "when": 1, "expand": 0.3}),
    ("  + the last three together", {"time": 3, "when": 1, "contextual": 0.5, "sentences": 1.0, "expand": 0.3}),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dump")
    ap.add_argument("--bench", default="target/release/memmachine-bench")
    ap.add_argument("--tokenize", default="crates/domain/src/retrieval/tokenize.rs")
    a = ap.parse_args()
    source = open(a.tokenize).read().split("STOPWORDS")[1].split("];")[0]
    STOPWORDS.update(re.findall(r'"([^"]+)"', source))
    convs = load(a.dump)
    lab = Lab(a.dump, a.bench)
    print("| method | R@10 0-4 | R@10 5-9 | R@5 / R@10 / R@20 all | multi-hop / temporal / open / single R@10 all |")
    print("|---|---:|---:|---|---|")
    for name, o in METHODS:
        tune, test = recall(convs, o, range(5), lab)[0], recall(convs, o, range(5, 10), lab)[0]
        (r5, r10, r20), cats = recall(convs, o, range(10), lab)
        print(f"| {name} | {tune[1]:.3f} | {test[1]:.3f} | {r5:.3f} / {r10:.3f} / {r20:.3f} | "
              + " / ".join(f"{cats[k]:.3f}" for k in (1, 2, 3, 4)) + " |", flush=True)


if __name__ == "__main__":
    main()
