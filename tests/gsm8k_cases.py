"""GSM8K answer cases shared by the verifier tests and the per-token reward tests."""

GSM8K_CASES = [
    # (completion, reference, expected under "gsm8k" (strict then flexible), expected under "gsm8k_strict")
    ("Janet makes 9 * 2 = 18 dollars.\n#### 18", "18", 1.0, 1.0),
    ("#### 18", "#### 18", 1.0, 1.0),
    ("so she pays $1,234.50.\n#### $1,234.50", "1234.5", 1.0, 1.0),
    ("#### 1,234", "1234", 1.0, 1.0),
    ("#### 1234", "1,234", 1.0, 1.0),
    ("The answer is -3.", "-3", 1.0, 1.0),
    ("The answer is 3.0", "3", 1.0, 1.0),
    ("the final answer is: 42 apples", "42", 1.0, 1.0),
    ("Answer: 42", "42", 1.0, 1.0),
    ("We get \\boxed{42}.", "42", 1.0, 1.0),
    ("We get \\boxed{\\$42}.", "42", 1.0, 1.0),
    ("We get \\boxed{42 \\text{ dollars}}.", "42", 1.0, 1.0),
    ("Total: 5 + 13 = 18 dollars.", "18", 1.0, 0.0),  # flexible only
    ("It costs 18.", "18", 1.0, 0.0),  # trailing period
    ("It costs \u221218 degrees", "-18", 1.0, 0.0),  # Unicode minus
    ("#### 17", "18", 0.0, 0.0),
    ("#### 18\nsome more text with 99", "18", 1.0, 1.0),  # strict wins over a later stray number
    ("The answer is 5. Wait, #### 18", "18", 1.0, 1.0),  # the last strict form wins
    ("#### 18 then \\boxed{19}", "18", 0.0, 0.0),
    ("16-3 = 13", "-3", 0.0, 0.0),  # a minus after a digit is subtraction
    ("no numbers at all", "18", 0.0, 0.0),
    ("", "18", 0.0, 0.0),
    ("#### 18", "a reference without a number", None, None),
    ("#### 18", "3 and 4", None, None),  # ambiguous reference
    ("#### 18", "Janet sells 16 - 3 - 4 = 9 eggs.\n#### 18", 1.0, 1.0),  # full solution as reference
    ("#### ١٨", "18", 0.0, 0.0),  # Arabic-Indic digits are not read as numbers
    ("#### １８", "18", 0.0, 0.0),  # fullwidth digits neither
]
