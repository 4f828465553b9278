from longtask.cli import main

main()
