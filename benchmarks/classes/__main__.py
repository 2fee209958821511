from benchmarks.classes.main import main

main()
