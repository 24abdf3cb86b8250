def main() -> int:
    raise SystemExit("quantcompare-client: not implemented yet")
