from services.learner.main import main

main()
