"""Typed, validated inputs: hardware profile, model, job (with its layout), validation case, plan.

Every bad input stops here with an `InputError` naming the file and field; nothing downstream re-checks.
"""
