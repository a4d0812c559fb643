"""`python -m gpuwatch` entry point."""

from gpuwatch.cli import main

raise SystemExit(main())
