"""Rule-30 reference models: the golden char-based model of the seed and a packed-bit model.

```
 "0110…" (one char per cell) ──step_chars──► "1101…"      golden: the seed's Figure 4, literally
      │ chars_to_words ▲ words_to_chars
 input[32] words  ──step_words──► output[32] words        packed: what the register window holds
```

Rule encoding (Wolfram's convention, also the seed's ``g_rules_array``): the neighbourhood
of cell i is ``k = left * 4 + centre * 2 + right``; bit k of the rule number is the new value
of the cell. Rule 30 = 0b00011110 gives the table 0,1,1,1,1,0,0,0 of Figure 4. Any rule
0..255 is accepted.

Wrap-around: the line is a ring of ``line_length`` cells (Figure 4: the left neighbour of cell
0 is cell ``line_length - 1``, the right neighbour of the last cell is cell 0).

Bit order of the register words (the seed gives "up to 1024 bits in units of 32 bits, one bit
per cell" but fixes no order, so this is our choice): cell i is bit ``i % 32`` of word
``i // 32`` (word 0 at input[0], offset 0x20). Cells at ``i >= line_length`` are ignored on
input and zero on output.
"""

WORD_BITS = 32
WORDS = 32
MAX_LINE_LENGTH = WORD_BITS * WORDS  # 1024 cells
RULE30 = 30

# The seed's Figure 4, g_rules_array[index] for index = 0b000 .. 0b111.
FIGURE4_RULES_ARRAY = (0, 1, 1, 1, 1, 0, 0, 0)


def rules_array(rule=RULE30):
    """The 8-entry new-cell table of an elementary rule: entry k = bit k of ``rule``."""
    if not 0 <= rule <= 255:
        raise ValueError(f"rule must be 0..255, not {rule!r}")
    return tuple((rule >> k) & 1 for k in range(8))


def _check_cells(line, max_length=None):
    if not line:
        raise ValueError("a line must have at least 1 cell, not 0")
    if max_length is not None and len(line) > max_length:
        raise ValueError(f"line length must be 1..{max_length} cells, not {len(line)!r}")
    if set(line) - {"0", "1"}:
        raise ValueError(f"cells must be the characters '0' and '1', not {sorted(set(line) - {'0', '1'})!r}")


# Golden reference: the seed's Figure 4 ----------------------------------------------------------

def step_chars(source, rule=RULE30):
    """One generation of ``source`` (a str, one '0'/'1' character per cell), as Figure 4 does it.

    Any length >= 1 (the register window holds up to 1024 cells; the model needs no limit).
    """
    _check_cells(source)
    g_rules_array = rules_array(rule)
    line_length = len(source)
    dest = [None] * line_length
    for i in range(line_length):
        bit_left_index = (line_length - 1) if i == 0 else (i - 1)
        bit_left = int(source[bit_left_index])
        bit_mid = int(source[i])
        bit_right = int(source[(i + 1) % line_length])
        index = bit_left * 4 + bit_mid * 2 + bit_right
        dest[i] = str(g_rules_array[index])
    return "".join(dest)


def run_chars(source, generations=1, rule=RULE30):
    """``generations`` successive generations of ``source``: the last one."""
    if generations < 0:
        raise ValueError(f"generations must be >= 0, not {generations!r}")
    line = source
    for _ in range(generations):
        line = step_chars(line, rule)
    return line


# Register words <-> cells -------------------------------------------------------------------

def chars_to_words(line):
    """The 32 input words that hold ``line``: cell i is bit i % 32 of word i // 32; the rest 0."""
    _check_cells(line, MAX_LINE_LENGTH)
    words = [0] * WORDS
    for i, cell in enumerate(line):
        if cell == "1":
            words[i // WORD_BITS] |= 1 << (i % WORD_BITS)
    return words


def words_to_chars(words, line_length):
    """The first ``line_length`` cells held in ``words`` (bits beyond are ignored)."""
    if not 1 <= line_length <= MAX_LINE_LENGTH:
        raise ValueError(f"line length must be 1..{MAX_LINE_LENGTH} bits, not {line_length!r}")
    if len(words) != WORDS:
        raise ValueError(f"expected {WORDS} words, not {len(words)}")
    return "".join(str((words[i // WORD_BITS] >> (i % WORD_BITS)) & 1) for i in range(line_length))


# Packed-bit model: 32 cells per word, as the seed's bit-based implementation ---------------------

def step_words(words, line_length, rule=RULE30):
    """One generation on the 32 register words; cells >= line_length come out zero.

    Works a word at a time with shifts (two reads per 32-cell segment, like the seed's
    bit-based software); it shares no code with ``step_chars``, so each checks the other.
    """
    if not 1 <= line_length <= MAX_LINE_LENGTH:
        raise ValueError(f"line length must be 1..{MAX_LINE_LENGTH} bits, not {line_length!r}")
    if len(words) != WORDS:
        raise ValueError(f"expected {WORDS} words, not {len(words)}")
    table = rules_array(rule)
    full = (1 << WORD_BITS) - 1
    last = line_length - 1
    mask = [(full if (k + 1) * WORD_BITS <= line_length else (1 << max(0, line_length - k * WORD_BITS)) - 1)
            for k in range(WORDS)]
    cur = [w & m for w, m in zip(words, mask)]
    first_cell = cur[0] & 1
    last_cell = (cur[last // WORD_BITS] >> (last % WORD_BITS)) & 1
    out = []
    for k in range(WORDS):
        prev_word = cur[k - 1] if k > 0 else 0
        next_word = cur[k + 1] if k < WORDS - 1 else 0
        left = ((cur[k] << 1) | (prev_word >> (WORD_BITS - 1))) & full     # bit b = cell b - 1
        right = (cur[k] >> 1) | ((next_word & 1) << (WORD_BITS - 1))     # bit b = cell b + 1
        if k == 0:
            left = (left & ~1) | last_cell                                   # wrap: left of cell 0
        if k == last // WORD_BITS:
            b = last % WORD_BITS
            right = (right & ~(1 << b)) | (first_cell << b)                  # wrap: right of last
        centre = cur[k]
        new = 0
        for index, value in enumerate(table):
            if value:
                l = left if index & 4 else ~left
                c = centre if index & 2 else ~centre
                r = right if index & 1 else ~right
                new |= l & c & r
        out.append(new & mask[k])
    return out


def run_words(words, line_length, generations=1, rule=RULE30):
    """``generations`` successive generations on the register words: the last one."""
    if generations < 0:
        raise ValueError(f"generations must be >= 0, not {generations!r}")
    words = chars_to_words(words_to_chars(words, line_length))   # cells >= line_length dropped
    for _ in range(generations):
        words = step_words(words, line_length, rule)
    return words


# Centre column ---------------------------------------------------------------------------------

def centre_column(terms, rule=RULE30):
    """The centre cell of ``terms`` generations grown from a single 1 (generation 0 included).

    For rule 30 this is OEIS A051023. The ring is wide enough that the wrap-around never
    reaches the centre.
    """
    width = 2 * terms + 3
    centre = width // 2
    line = "0" * centre + "1" + "0" * (width - centre - 1)
    column = []
    for _ in range(terms):
        column.append(int(line[centre]))
        line = step_chars(line, rule)
    return column
